#!/usr/bin/env python3
"""CI test of the Spack recipe (spack/packages/upcxx-extra-nvshmem/package.py), without Spack.

Spack is not installable on the CI machines, so this imports the recipe with a minimal stand-in of
Spack's package API (the directives record what they are given; CMakePackage's define helpers
format -D arguments as Spack's do) and checks the recipe against the project:

- its version is Cargo.toml's [package] version;
- it depends on rust (build, at least Cargo.toml's rust-version), cmake (build, at least the
  top-level CMakeLists.txt's cmake_minimum_required), upcxx +cuda, nvshmem and cuda;
- every -D argument its cmake_args() passes names a cache variable or option that the top-level
  CMakeLists.txt defines (option, set(... CACHE ...), find_program/find_path/find_library/find_file);
- the variables it sets for dependents (UPCXX_INSTALL, NVSHMEM_HOME) are the ones the installed
  CMake package reads (cmake/Find*ForExtra.cmake);
- spack/repo.yaml names a namespace.

It runs twice: once as Spack 0.x lays the modules out (CMakePackage from spack.package), once as
Spack >= 1.0 does (spack_repo.builtin.build_systems.cmake).

    python3 spack/test_recipe.py        (from anywhere; prints PASS, or the failures)
"""

import importlib.util
import os
import re
import shutil
import sys
import tempfile
import textwrap
import unittest

sys.dont_write_bytecode = True  # nothing written into the clone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = os.path.join(ROOT, "spack", "packages", "upcxx-extra-nvshmem", "package.py")

# ---- the stand-in of Spack's package API ---------------------------------------------------------
STUB_PACKAGE = textwrap.dedent(
    '''
    """Stand-in of spack.package for spack/test_recipe.py: directives record their arguments."""
    import os

    _pending = []


    def _directive(kind):
        def record(*args, **kwargs):
            _pending.append((kind, args, kwargs))
        return record


    version = _directive("version")
    variant = _directive("variant")
    depends_on = _directive("depends_on")
    conflicts = _directive("conflicts")
    license = _directive("license")
    maintainers = _directive("maintainers")
    requires = _directive("requires")
    provides = _directive("provides")
    patch = _directive("patch")
    resource = _directive("resource")


    def join_path(*parts):
        return os.path.join(*parts)


    class Prefix(str):
        """A path whose attributes are subdirectories, as Spack's Prefix."""
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return Prefix(os.path.join(self, name))


    class PackageBase:
        def __init_subclass__(cls, **kwargs):
            super().__init_subclass__(**kwargs)
            cls.directives = list(_pending)
            _pending.clear()

        def __init__(self, spec):
            self.spec = spec

        @staticmethod
        def define(name, value):
            if isinstance(value, bool):
                kind, value = "BOOL", "ON" if value else "OFF"
            elif isinstance(value, (list, tuple)):
                kind, value = "STRING", ";".join(str(v) for v in value)
            else:
                kind, value = "STRING", str(value)
            return "-D{0}:{1}={2}".format(name, kind, value)

        def define_from_variant(self, name, variant=None):
            value = self.spec.variants[variant or name]
            return self.define(name, value)


    class CMakePackage(PackageBase):
        pass


    EnvironmentModifications = dict
    '''
)


class FakeSpec:
    """What cmake_args() and the environment hooks read of a concretized spec."""

    def __init__(self, variants):
        from spack.package import Prefix  # the stub's

        self.variants = variants
        self._deps = {n: type("Dep", (), {"prefix": Prefix("/spack/opt/" + n)})()
                      for n in ("rust", "cmake", "upcxx", "nvshmem", "cuda", "binutils")}

    def __getitem__(self, name):
        return self._deps[name]


def write_stub(where, layout):
    os.makedirs(os.path.join(where, "spack"))
    with open(os.path.join(where, "spack", "__init__.py"), "w") as f:
        f.write("")
    with open(os.path.join(where, "spack", "package.py"), "w") as f:
        f.write(STUB_PACKAGE)
    if layout == "spack-1":
        bs = os.path.join(where, "spack_repo", "builtin", "build_systems")
        os.makedirs(bs)
        for d in ("spack_repo", "spack_repo/builtin", "spack_repo/builtin/build_systems"):
            open(os.path.join(where, d, "__init__.py"), "w").close()
        with open(os.path.join(bs, "cmake.py"), "w") as f:
            f.write("from spack.package import CMakePackage, PackageBase  # noqa: F401\n")
        # Spack >= 1.0's spack.package no longer exports the build systems.
        with open(os.path.join(where, "spack", "package.py"), "a") as f:
            f.write("\n__all__ = [n for n in dir() if not n.startswith('_') and n != 'CMakePackage']\n")


def load_recipe(layout):
    tmp = tempfile.mkdtemp(prefix="uxn-spack-stub-")
    write_stub(tmp, layout)
    for m in [m for m in sys.modules if m == "spack" or m.startswith(("spack.", "spack_repo"))]:
        del sys.modules[m]
    sys.path.insert(0, tmp)
    try:
        spec = importlib.util.spec_from_file_location("uxn_recipe_" + layout.replace("-", "_"), RECIPE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module, tmp
    except BaseException:
        sys.path.remove(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ---- what the project says ----------------------------------------------------------------------
def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def cargo_package_field(name):
    text = read("Cargo.toml")
    section = re.search(r"^\[package\]\n(.*?)(?=^\[)", text, re.S | re.M).group(1)
    return re.search(r'^{0}\s*=\s*"([^"]+)"'.format(name), section, re.M).group(1)


def cmake_cache_variables(text):
    """Every cache variable or option the CMake text defines (comments dropped)."""
    text = re.sub(r"#[^\n]*", "", text)
    names = set(re.findall(r"\boption\s*\(\s*([A-Za-z0-9_]+)", text, re.I))
    for m in re.finditer(r"\bset\s*\(\s*([A-Za-z0-9_]+)([^)]*)\)", text, re.I):
        if re.search(r"\bCACHE\b", m.group(2)):
            names.add(m.group(1))
    names.update(re.findall(r"\bfind_(?:program|path|library|file)\s*\(\s*([A-Za-z0-9_]+)", text, re.I))
    return names


def min_version(constraint):
    """'rust@1.85:' -> '1.85'; None without a lower bound."""
    m = re.search(r"@([0-9][0-9.]*):", constraint)
    return m.group(1) if m else None


def as_tuple(v):
    return tuple(int(x) for x in v.split("."))


# ---- the checks ----------------------------------------------------------------------------------
class RecipeTest:
    layout = None

    @classmethod
    def setUpClass(cls):
        cls.module, cls.tmp = load_recipe(cls.layout)
        cls.pkg_class = cls.module.UpcxxExtraNvshmem
        cls.directives = cls.pkg_class.directives

    @classmethod
    def tearDownClass(cls):
        sys.path.remove(cls.tmp)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def of(self, kind):
        return [(a, k) for (d, a, k) in self.directives if d == kind]

    def deps(self):
        out = {}
        for args, kwargs in self.of("depends_on"):
            name = re.match(r"[A-Za-z0-9_-]+", args[0]).group(0)
            out.setdefault(name, []).append((args[0], kwargs))
        return out

    def test_build_system(self):
        self.assertEqual(self.pkg_class.__mro__[1].__name__, "CMakePackage")

    def test_version_is_cargo_toml_version(self):
        versions = [a[0] for a, _ in self.of("version")]
        self.assertEqual(versions, [cargo_package_field("version")],
                         "the recipe's versions against Cargo.toml's [package] version")

    def test_rust_is_a_build_dependency_at_cargo_rust_version(self):
        rust = self.deps().get("rust")
        self.assertTrue(rust, "no depends_on('rust...')")
        constraint, kwargs = rust[0]
        self.assertEqual(kwargs.get("type"), "build")
        self.assertEqual(min_version(constraint), cargo_package_field("rust-version"))

    def test_cmake_at_cmake_minimum_required(self):
        cmake = self.deps().get("cmake")
        self.assertTrue(cmake, "no depends_on('cmake...')")
        constraint, kwargs = cmake[0]
        self.assertEqual(kwargs.get("type"), "build")
        want = re.search(r"cmake_minimum_required\s*\(\s*VERSION\s+([0-9.]+)", read("CMakeLists.txt")).group(1)
        self.assertEqual(min_version(constraint), want)

    def test_upcxx_cuda_nvshmem_cuda(self):
        deps = self.deps()
        for name in ("upcxx", "nvshmem", "cuda"):
            self.assertIn(name, deps, "no depends_on('{0}...')".format(name))
            for constraint, kwargs in deps[name]:
                self.assertIn("run", kwargs.get("type", ("build", "link")),
                              "{0}: a program built against the install needs it".format(constraint))
        self.assertTrue(any("+cuda" in c for c, _ in deps["upcxx"]), "upcxx without +cuda")
        # The UPC++ releases the C++ layer supports start at 2020.10.0 (docs/compatibility.md).
        self.assertEqual(min_version(deps["upcxx"][0][0]), "2020.10.0")
        # libnvshmem_host.so.3: NVSHMEM 3.x.
        self.assertEqual(as_tuple(min_version(deps["nvshmem"][0][0]))[0], 3)

    def test_every_cmake_define_is_a_cache_variable_of_cmakelists(self):
        known = cmake_cache_variables(read("CMakeLists.txt"))
        variants = [a[0] for a, _ in self.of("variant")]
        for values in ({v: False for v in variants}, {v: True for v in variants}):
            pkg = self.pkg_class(FakeSpec(values))
            args = pkg.cmake_args()
            self.assertTrue(args, "cmake_args() returns nothing")
            for arg in args:
                m = re.match(r"-D([A-Za-z0-9_]+)(:[A-Z]+)?=", arg)
                self.assertTrue(m, "not a -D argument: " + arg)
                self.assertIn(m.group(1), known,
                              "{0}: CMakeLists.txt defines no such cache variable or option "
                              "(it defines {1})".format(arg, ", ".join(sorted(known))))

    def test_cargo_is_spacks_rust(self):
        args = self.pkg_class(FakeSpec({"debuginfo": False})).cmake_args()
        self.assertIn("-DCARGO_EXECUTABLE:STRING=/spack/opt/rust/bin/cargo", args)

    def test_environment_names_what_the_package_config_reads(self):
        env = {}

        class Env:
            def set(self, k, v):
                env[k] = v

        pkg = self.pkg_class(FakeSpec({"debuginfo": False}))
        pkg.setup_dependent_build_environment(Env(), None)
        self.assertEqual(env, {"UPCXX_INSTALL": "/spack/opt/upcxx", "NVSHMEM_HOME": "/spack/opt/nvshmem"})
        find = read("cmake/FindUpcxxForExtra.cmake") + read("cmake/FindNvshmemForExtra.cmake")
        for name in env:
            self.assertIn("$ENV{%s}" % name, find, name + ": the installed package does not read it")
        env.clear()
        pkg.setup_run_environment(Env())
        self.assertEqual(set(env), {"UPCXX_INSTALL", "NVSHMEM_HOME"})


class Spack0Layout(RecipeTest, unittest.TestCase):
    layout = "spack-0"


class Spack1Layout(RecipeTest, unittest.TestCase):
    layout = "spack-1"


class RepoLayoutTest(unittest.TestCase):
    def test_repo_yaml_names_a_namespace(self):
        m = re.search(r"^repo:\s*\n\s+namespace:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$", read("spack/repo.yaml"), re.M)
        self.assertTrue(m, "spack/repo.yaml: no repo: namespace:")

    def test_package_directory_is_the_package_name(self):
        # Spack's name of class UpcxxExtraNvshmem is upcxx-extra-nvshmem, its directory's name.
        self.assertTrue(os.path.isfile(RECIPE))
        self.assertIn("class UpcxxExtraNvshmem(", read("spack/packages/upcxx-extra-nvshmem/package.py"))


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    ok = result.wasSuccessful() and result.testsRun > 0
    print("PASS: the Spack recipe matches the project" if ok else "FAIL: the Spack recipe")
    sys.exit(0 if ok else 1)
