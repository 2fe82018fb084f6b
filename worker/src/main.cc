// ucudnn-worker: the GPU benchmark worker daemon (see ucudnn-worker --help).
#include "ucudnn/worker/worker_main.h"

int main(int argc, char** argv) { return ucudnn::worker::WorkerMain(argc, argv); }
