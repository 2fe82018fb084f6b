"""ucudnn.torch against the client library's CPU backend: convert()'s options, the caches' paths,
the README's recipe.

Run through ctest (tests/python.cmake), which sets UCUDNN_LIBRARY and the plan-cache tool's path."""

import copy
import ctypes
import io
import json
import os
import pickle
import tempfile
import unittest
from unittest import mock

import torch
from torch import nn

import support  # (python/ and bench/ on the path; shared helpers)
import ucudnn.torch as ut
from ucudnn.torch import handle as ut_handle
from ucudnn import _lib


class OptionsTest(unittest.TestCase):
    def test_unknown_option_is_named(self):
        with self.assertRaisesRegex(TypeError, "unknown option 'sever'"):
            ut.convert(nn.Conv2d(1, 1, 1), sever="x:1")

    def test_not_a_module(self):
        with self.assertRaisesRegex(TypeError, "expected a torch.nn.Module"):
            ut.convert("resnet")

    def test_bad_workspace_limit(self):
        with self.assertRaisesRegex(ValueError, "workspace_limit"):
            ut.convert(nn.Conv2d(1, 1, 1), workspace_limit=-1)

    def test_bad_values_raise_naming_the_option(self):
        conv = nn.Conv2d(1, 1, 1)
        for config, pattern in (
                ({"workspace_bytes": "64XB"}, "workspace_bytes='64XB' is not a size"),
                ({"workspace_bytes": -1}, "workspace_bytes must be >= 0"),
                ({"workspace_bytes": "2TiB"}, "over 1 TiB"),
                ({"policy": "bogus"}, "policy='bogus' is not one of undivided"),
                ({"workspace_mode": "sum"}, "workspace_mode='sum'"),
                ({"algorithms": "cudnn"}, "algorithms='cudnn'"),
                ({"deadline_ms": "soon"}, "deadline_ms must be an int in"),
                ({"deadline_ms": 0}, "deadline_ms must be an int in"),
                ({"server_wait_ms": 600001}, "server_wait_ms must be an int in"),
                ({"tls": "maybe"}, "option 'tls' must be a bool"),
                ({"server": "a;UCUDNN_TOKEN=x"}, "must not contain ';'"),
                ({"framework": "torch\x1b[31m"}, "framework must be 1 to 128 printable"),
                ({"framework": "x" * 129}, "framework must be 1 to 128 printable")):
            with self.subTest(config=config), self.assertRaisesRegex(ValueError, pattern):
                ut.convert(conv, **config)
        self.assertIs(type(conv), nn.Conv2d, "a refused convert() changes nothing")

    def test_good_values_are_passed_as_the_library_reads_them(self):
        runtime = ut.convert(nn.Conv2d(1, 1, 1), workspace_bytes="64MiB", policy="all",
                             tls=False, deadline_ms=500, framework="torch-x/benchmark",
                             cache_path="off", server="")._ucudnn_runtime
        self.assertIn("UCUDNN_WORKSPACE_BYTES=67108864", runtime.options)
        self.assertIn("UCUDNN_POLICY=all", runtime.options)
        self.assertIn("UCUDNN_TLS=0", runtime.options)
        self.assertIn("UCUDNN_FRAMEWORK=torch-x/benchmark", runtime.options)
        self.assertEqual(ut.parse_bytes("1.5KiB"), 1536)
        self.assertEqual(ut.parse_bytes(4096), 4096)

    def test_framework_identity_names_version_and_benchmark_mode(self):
        saved = torch.backends.cudnn.benchmark
        try:
            torch.backends.cudnn.benchmark = True
            self.assertEqual(ut.framework_identity(), f"torch-{torch.__version__}/benchmark")
            torch.backends.cudnn.benchmark = False
            self.assertTrue(ut.framework_identity().endswith("/heuristic"))
        finally:
            torch.backends.cudnn.benchmark = saved
        runtime = ut.convert(nn.Conv2d(1, 1, 1), cache_path="off", server="")._ucudnn_runtime
        self.assertIn(f"UCUDNN_FRAMEWORK={ut.framework_identity()}", runtime.options)

    def test_the_library_names_its_version(self):
        self.assertRegex(_lib.load().version(), r"^\d+\.\d+\.\d+$")

    def test_bad_shape_is_named_by_the_library(self):
        context = _lib.Context(_lib.load(), "cpu", "UCUDNN_CACHE_PATH=off")
        shape = _lib.ConvShape(0, 2, 0, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0)  # c = 0
        with self.assertRaisesRegex(_lib.ShapeError, "BAD_PARAM: shape.c: "):
            context.workspace_size(shape)
        with self.assertRaisesRegex(_lib.ShapeError, "backend: unknown backend 'tpu'"):
            _lib.Context(_lib.load(), "tpu", "")

    def test_cudnn_handle_choice(self):
        with self.assertRaisesRegex(ValueError, "cudnn_handle must be one of framework, own"):
            ut.convert(nn.Conv2d(1, 1, 1), cudnn_handle="mine")
        model = ut.convert(nn.Conv2d(1, 1, 1), cudnn_handle="own", server="", cache_path="off")
        self.assertEqual(model._ucudnn_runtime.cudnn_handle, "own")
        loaded = pickle.loads(pickle.dumps(model))
        self.assertEqual(loaded._ucudnn_runtime.cudnn_handle, "own", "a checkpoint keeps it")
        self.assertEqual(ut.convert(nn.Conv2d(1, 1, 1), server="")._ucudnn_runtime.cudnn_handle,
                         "framework")
        # This PyTorch has no CUDA: nothing to borrow, each context makes its own.
        self.assertIsNone(ut.framework_cudnn_handle())

    def test_a_cudnn_handle_is_borrowed_only_from_the_one_cudnn_in_the_process(self):
        maps = os.path.join(tempfile.mkdtemp(), "maps")
        lines = [
            "7f00-7f01 r-xp 00000000 08:01 11 /opt/venv/nvidia/cudnn/lib/libcudnn.so.9",
            "7f01-7f02 r--p 00001000 08:01 11 /opt/venv/nvidia/cudnn/lib/libcudnn.so.9",
            "7f02-7f03 r-xp 00000000 08:01 12 /opt/venv/nvidia/cudnn/lib/libcudnn_graph.so.9",
            "7f03-7f04 rw-p 00000000 00:00 0 ",  # anonymous: five fields
            "7f04-7f05 rw-p 00000000 00:00 0",
            "7f05-7f06 r-xp 00000000 08:01 13 /usr/lib/libc.so.6",
        ]
        with open(maps, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.assertEqual(ut_handle.cudnn_instances(maps),
                         {os.path.realpath("/opt/venv/nvidia/cudnn/lib/libcudnn.so.9")})
        with open(maps, "a") as f:  # the library's own copy beside PyTorch's
            f.write("7f06-7f07 r-xp 00000000 08:01 14 /usr/local/cuda/lib64/libcudnn.so.9.14.0\n")
        self.assertEqual(len(ut_handle.cudnn_instances(maps)), 2)
        self.assertIsNone(ut_handle.cudnn_instances(maps + ".missing"))

    def test_a_context_on_a_borrowed_handle_needs_the_cudnn_backend(self):
        library = _lib.load()
        self.assertIsNotNone(library.ShapeCreateOnHandle)
        # "cpu" never borrows: its context is the CPU backend's whatever the handle.
        context = _lib.Context(library, "cpu", "UCUDNN_CACHE_PATH=off", cudnn_handle=1234)
        self.assertFalse(context.borrowed)
        handle = ctypes.c_void_p()
        self.assertEqual(library.ShapeCreateOnHandle(ctypes.byref(handle), None, b""),
                         _lib.BAD_PARAM)
        self.assertIn(b"cudnn_handle: must not be NULL", library._last_error())
        # No GPU here: refused before the handle is read.
        status = library.ShapeCreateOnHandle(ctypes.byref(handle), 1234, b"")
        self.assertEqual(status, _lib.UNAVAILABLE, library._last_error())
        self.assertFalse(handle.value)

    def test_subclasses_keeping_torchs_forward_are_converted_others_left_alone(self):
        model = nn.Sequential(Mine(1, 1, 1), nn.Conv2d(1, 1, 1), Gated(1, 1, 1))
        reference = copy.deepcopy(model)
        ut.convert(model, server="", cache_path="off")
        self.assertIsInstance(model[0], Mine)
        self.assertIsInstance(model[0], ut.UcudnnConv2d)
        self.assertIs(type(model[1]), ut.UcudnnConv2d)
        self.assertIs(type(model[2]), Gated)
        x = torch.randn(2, 1, 4, 4)
        self.assertTrue(torch.allclose(model(x), reference(x)))
        # Copied and pickled as what it is; unconvert() gives the subclass back.
        for copied in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
            self.assertIs(type(copied[0]), type(model[0]))
            self.assertTrue(torch.allclose(copied(x), reference(x)))
        ut.unconvert(model)
        self.assertIs(type(model[0]), Mine)


class Mine(nn.Conv2d):
    """A subclass with torch.nn's forward (torchvision's Conv3DSimple: only its constructor)."""


class Gated(nn.Conv2d):
    """A subclass whose forward does more than a convolution."""

    def forward(self, x):
        return super().forward(x).sigmoid()


class CachesTest(unittest.TestCase):
    """The machine's caches: one path rule (core/src/files.cc, UserCachePath) for the library's
    and the adapter's, and ucudnn-doctor's report of them."""

    def test_paths_follow_the_library_rule(self):
        from ucudnn import _cache
        environ = {k: v for k, v in os.environ.items() if not k.startswith("UCUDNN_")}
        with mock.patch.dict(os.environ, dict(environ, XDG_CACHE_HOME="/c"), clear=True):
            self.assertEqual(_cache.cache_path("UCUDNN_COMPILED_PLAN_CACHE", "compiled_plans"),
                             "/c/ucudnn/compiled_plans")
        with mock.patch.dict(os.environ, dict(environ, XDG_CACHE_HOME="rel", HOME="/h"),
                             clear=True):
            self.assertEqual(_cache.cache_path("UCUDNN_CACHE_PATH", "plans.bin"),
                             "/h/.cache/ucudnn/plans.bin")
        for off in ("off", " None ", "0", ""):
            with mock.patch.dict(os.environ, dict(environ, UCUDNN_CACHE_PATH=off), clear=True):
                self.assertIsNone(_cache.cache_path("UCUDNN_CACHE_PATH", "plans.bin"), off)
        with mock.patch.dict(os.environ, dict(environ, UCUDNN_CACHE_PATH=" /p/x.bin "),
                             clear=True):
            self.assertEqual(_cache.cache_path("UCUDNN_CACHE_PATH", "plans.bin"), "/p/x.bin")

    def test_doctor_reports_what_the_caches_hold(self):
        from ucudnn import doctor
        with tempfile.TemporaryDirectory() as home:
            compiled = os.path.join(home, "ucudnn", "compiled_plans")
            os.makedirs(compiled)
            for name, data in (("a.plan", "12345"), ("b.plan", "678"), ("a.plan.tmp.1.0", "9")):
                with open(os.path.join(compiled, name), "w") as f:
                    f.write(data)
            with open(os.path.join(home, "ucudnn", "host_bound.json"), "w") as f:
                json.dump({"k1": {}, "k2": {}}, f)
            with open(os.path.join(home, "ucudnn", "routes.json"), "w") as f:
                json.dump({"k1": {}, "k2": {}, "k3": {}}, f)
            environ = {k: v for k, v in os.environ.items() if not k.startswith("UCUDNN_")}
            with mock.patch.dict(os.environ, dict(environ, XDG_CACHE_HOME=home), clear=True):
                caches = doctor._caches()
            with mock.patch.dict(os.environ, dict(environ, XDG_CACHE_HOME=home,
                                                  UCUDNN_COMPILED_PLAN_CACHE="off"), clear=True):
                off = doctor._caches()
        self.assertEqual(caches["plan_cache"],
                         {"path": os.path.join(home, "ucudnn", "plans.bin"), "bytes": None})
        self.assertEqual(caches["compiled_plans"], {"path": compiled, "plans": 2, "bytes": 8})
        self.assertEqual(caches["host_bound_answers"]["records"], 2)
        self.assertEqual(caches["route_decisions"],
                         {"path": os.path.join(home, "ucudnn", "routes.json"), "records": 3})
        self.assertEqual(off["compiled_plans"], {"path": None, "plans": 0, "bytes": 0})


class ReadmeTest(unittest.TestCase):
    def test_the_readmes_snippet_runs_as_written(self):
        with open(os.path.join(support.REPO, "README.md")) as f:
            readme = f.read()
        section = readme[readme.index("## PyTorch\n"):]
        start = section.index("```python\n") + len("```python\n")
        code = section[start:section.index("```\n", start)]
        output = io.StringIO()
        benchmark = torch.backends.cudnn.benchmark  # the snippet sets it: the process's after
        try:
            with mock.patch.dict(os.environ, {"UCUDNN_SERVER": "", "UCUDNN_CACHE_PATH": "off",
                                              "UCUDNN_ROUTE_CACHE": "off"}), \
                    mock.patch("sys.stdout", output):
                exec(compile(code, "README.md (PyTorch)", "exec"), {})
        finally:
            torch.backends.cudnn.benchmark = benchmark
        self.assertIn("calls ran plans", output.getvalue())


if __name__ == "__main__":
    unittest.main()
