"""What tests share, in one place; tests/conftest.py keeps only set-up and fixtures.

repo               REPO, PYTHON, a scratch checkout, relative paths, run_binary
training           two replicas (mirrored_2), 6 steps of tiny.gin, an image folder,
                   a classifier declared for another dataset
tensorboard_server a real TensorBoard to read a run's events through its HTTP API
clusters           multi-process runs on 127.0.0.1 and waits without a fixed deadline
ps_cluster         a parameter-server cluster whose chief is a test's coordinator script
ps_buffer          coordinator script (run as a process): the sample buffer's test
ps_streams         coordinator script (run as a process): each worker's own shuffle
slurm_cluster      a single-node Slurm cluster on localhost
paper_biggan       BigGAN at the paper's shape, and a one-step GANStep
tiny_tfds          a 12-example TFDS dataset built offline
costs              a pytest plugin: where each test's time goes (make test loads it)
"""
