"""lamb_lars: huge-batch training science in JAX (LARS/LAMB, BN groups, batch-size studies)."""
import setuptools

CORE = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "orbax-checkpoint==0.12.8",
    "ml-collections==1.1.0",
    "tensorflow-datasets==4.9.10",
    "grain==0.2.18",
    "array-record==0.8.6",
    "tensorboardX==2.6.5",
    "numpy>=1.26",
    "tqdm>=4.66",
    "absl-py>=2.1",
    "matplotlib>=3.8",
    "optuna==5.0.0",        # the study search: quasi-random sampler and ASHA pruner (lamb_lars/study/running/search.py)
]

GCS = ["gcsfs==2026.10.1"]

setuptools.setup(
    name="lamb_lars",
    version="0.1.0",
    description="JAX research codebase for the science of huge-batch training.",
    license="Apache-2.0",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # One top-level name in site-packages. The repo's configs/ and input_pipeline/ are the packages
    # lamb_lars.configs and lamb_lars.input_pipeline (symlinks in lamb_lars/), so an installed trial needs no
    # PYTHONPATH and nothing generic (`configs`, `train`) is installed.
    packages=setuptools.find_packages(include=["lamb_lars", "lamb_lars.*"]),
    entry_points={"console_scripts": ["lamb_lars_train = lamb_lars.main:main"]},
    install_requires=CORE,
    extras_require={
        # The offline MNIST copy; it pins numpy<2, so `.ci/run` installs it with --no-deps.
        # gcp-storage-emulator: tests/test_gcs_workdir.py runs train, resume and a study on gs:// against it.
        "test": ["pytest==9.0.3", "pytest-xdist==3.8.0", "tensorboard==2.21.0", "nbformat>=5.9", "nbclient>=0.10", "ipykernel>=6.29",
                 "gcp-storage-emulator==2026.7.19", "scikit-learn==1.9.1", *GCS],  # sklearn: examples/digits' data
        # --workdir=gs://BUCKET/…: etils.epath reaches GCS through gcsfs (orbax's TensorStore needs nothing more).
        "gcs": GCS,
        "bench": ["torch==2.13.0"],
        # `python -m lamb_lars.study run --executor=ray` (docs/ray.md); the version tests/test_ray_executor.py ran.
        "ray": ["ray[default]==2.60.0"],
    },
)
