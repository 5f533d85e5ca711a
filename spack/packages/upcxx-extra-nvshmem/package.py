# Spack recipe for upcxx-extra-nvshmem: NVSHMEM's symmetric heap addressed from UPC++.
# spack/README.md says how to use it; spack/test_recipe.py checks it against the project (CI).

from spack.package import *

try:  # Spack >= 1.0: the build systems live in the builtin package repository
    from spack_repo.builtin.build_systems.cmake import CMakePackage
except ImportError:  # Spack 0.x: spack.package exports them
    from spack.package import CMakePackage


class UpcxxExtraNvshmem(CMakePackage):
    """NVSHMEM's symmetric heap addressed from UPC++: a C library (Rust cdylib with a C ABI),
    a header-only C++ layer for UPC++ and the upcxx-nvshmem-doctor command."""

    license("BSD-3-Clause")

    # The version of Cargo.toml. No release is published yet: build it from a clone with
    # `spack develop` (spack/README.md).
    version("0.1.0")

    variant(
        "debuginfo",
        default=False,
        description="Install the library and the doctor with their debug info (else stripped)",
    )

    # The top-level CMakeLists.txt drives cargo.
    depends_on("cmake@3.20:", type="build")
    depends_on("rust@1.85:", type="build")
    depends_on("c", type="build")
    # ~debuginfo (the default) strips the installed files with the system's `strip` (binutils).

    # What a program built against the install needs: the C++ layer's UPC++ with CUDA, the
    # NVSHMEM host library (3.x: libnvshmem_host.so.3) and CUDA. The installed CMake package
    # finds them through UPCXX_INSTALL and NVSHMEM_HOME (set below for dependents).
    depends_on("upcxx@2020.10.0: +cuda", type=("link", "run"))
    depends_on("nvshmem@3:", type=("link", "run"))
    depends_on("cuda@12:", type=("link", "run"))

    def cmake_args(self):
        return [
            self.define("CARGO_EXECUTABLE", self.spec["rust"].prefix.bin.cargo),
            self.define_from_variant("UXN_INSTALL_DEBUG_INFO", "debuginfo"),
        ]

    def _set_homes(self, env):
        env.set("UPCXX_INSTALL", self.spec["upcxx"].prefix)
        env.set("NVSHMEM_HOME", self.spec["nvshmem"].prefix)

    def setup_run_environment(self, env):
        self._set_homes(env)

    def setup_dependent_build_environment(self, env, dependent_spec):
        self._set_homes(env)
