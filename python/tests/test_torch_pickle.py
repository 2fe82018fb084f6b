"""Pickles of a converted model across the split of ucudnn.torch into a package: a model pickled by
the one-module adapter (python/tests/data/converted_before_split.pkl: nn.Sequential(Conv2d(1, 2,
1)) converted with cache_path="off", pickled with protocol 2) loads, and a new pickle names the
same ucudnn.torch globals, so that it loads in the older version too."""
import os
import pickle
import pickletools
import unittest

import torch

import support  # noqa: F401  (python/ on the path)

import ucudnn.torch as ut

OLD_PICKLE = os.path.join(os.path.dirname(__file__), "data", "converted_before_split.pkl")


def ucudnn_globals(data):
    """The 'module name' of every GLOBAL in `data` that belongs to ucudnn."""
    return sorted({arg for op, arg, _ in pickletools.genops(data)
                   if op.name == "GLOBAL" and arg.startswith("ucudnn")})


class PickleTest(unittest.TestCase):
    def test_a_model_pickled_before_the_split_loads_and_runs(self):
        with open(OLD_PICKLE, "rb") as f:
            data = f.read()
        self.assertIn("ucudnn.torch UcudnnConv2d", ucudnn_globals(data))
        model = pickle.loads(data)
        self.assertIs(type(model[0]), ut.UcudnnConv2d)
        x = torch.randn(2, 1, 4, 4)
        expected = torch.nn.functional.conv2d(x, model[0].weight, model[0].bias)
        torch.testing.assert_close(model(x), expected)

    def test_a_new_pickle_names_the_same_globals_as_before(self):
        with open(OLD_PICKLE, "rb") as f:
            old = ucudnn_globals(f.read())
        torch.manual_seed(0)
        model = ut.convert(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1)), cache_path="off")
        new = ucudnn_globals(pickle.dumps(model, protocol=2))
        self.assertEqual(new, old)
        self.assertTrue(all(name.split(" ")[0] == "ucudnn.torch" for name in new), new)


if __name__ == "__main__":
    unittest.main()
