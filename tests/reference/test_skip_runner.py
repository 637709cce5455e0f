"""tests/numerics/run_tests.py, the unittest runner ctest uses for the numerics entries: exit 77
(ctest's SKIP_RETURN_CODE) when every test skipped, 0 when one passed, 1 on a failure. Runs it on
throwaway modules, and on the numerics modules that skip themselves with their skip condition
forced (no accel run):

    PYTHONDONTWRITEBYTECODE=1 scripts/python -m unittest discover -s tests/reference -p test_skip_runner.py -v
"""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.dont_write_bytecode = True
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NUMERICS = os.path.join(ROOT, "tests", "numerics")

MODULES = {
    "all_skipped": """
        @unittest.skipUnless(False, "no such facility")
        class Skipped(unittest.TestCase):
            def test_a(self):
                raise AssertionError("must not run")

            def test_b(self):
                raise AssertionError("must not run")
        """,
    "skip_test_call": """
        class Skipped(unittest.TestCase):
            def test_a(self):
                self.skipTest("not here")
        """,
    "setup_class_skips": """
        class Skipped(unittest.TestCase):
            @classmethod
            def setUpClass(cls):
                raise unittest.SkipTest("not here")

            def test_a(self):
                raise AssertionError("must not run")
        """,
    "subtests_skipped": """
        class Skipped(unittest.TestCase):
            def test_a(self):
                for i in range(2):
                    with self.subTest(i=i):
                        self.skipTest("not here")
        """,
    "passes": """
        class Passes(unittest.TestCase):
            def test_a(self):
                self.assertEqual(1 + 1, 2)
        """,
    "pass_and_skip": """
        class Passes(unittest.TestCase):
            def test_a(self):
                pass

            @unittest.skip("not here")
            def test_b(self):
                pass
        """,
    "subtest_pass_and_skip": """
        class Passes(unittest.TestCase):
            def test_a(self):
                with self.subTest("ran"):
                    pass
                with self.subTest("skipped"):
                    self.skipTest("not here")
        """,
    "fails": """
        class Fails(unittest.TestCase):
            def test_a(self):
                self.assertEqual(1, 2)
        """,
    "errors": """
        class Errors(unittest.TestCase):
            def test_a(self):
                raise RuntimeError("boom")
        """,
    "fail_and_skip": """
        class Fails(unittest.TestCase):
            def test_a(self):
                self.fail("no")

            @unittest.skip("not here")
            def test_b(self):
                pass
        """,
    "no_tests": """
        class Empty(unittest.TestCase):
            pass
        """,
}


class RunTestsExitCode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_run_tests_")
        for name, body in MODULES.items():
            with open(os.path.join(cls._tmp.name, name + ".py"), "w") as f:
                f.write("import unittest\n\n\n" + textwrap.dedent(body))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def run_module(self, target, runner="run_tests"):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=NUMERICS)
        return subprocess.run([sys.executable, "-m", runner, "-v", target], cwd=self._tmp.name, env=env,
                              capture_output=True, text=True, timeout=120)

    def assertExit(self, target, code):
        p = self.run_module(target)
        self.assertEqual(p.returncode, code, f"{target}\n{p.stdout}{p.stderr}")
        return p

    def test_every_test_skipped_is_77(self):
        for target in ("all_skipped", "all_skipped.Skipped", "skip_test_call", "setup_class_skips",
                       "subtests_skipped"):
            with self.subTest(target):
                p = self.assertExit(target, 77)
                self.assertIn("skipped", p.stderr)

    def test_plain_unittest_reports_the_same_skips_as_a_pass(self):
        # Why the runner: ctest sees exit 0 from `python -m unittest` and reports "Passed".
        self.assertEqual(self.run_module("all_skipped", runner="unittest").returncode, 0)

    def test_a_pass_is_0(self):
        for target in ("passes", "pass_and_skip", "subtest_pass_and_skip"):
            with self.subTest(target):
                self.assertExit(target, 0)

    def test_a_failure_is_1(self):
        for target in ("fails", "errors", "fail_and_skip", "no_such_module", "passes.NoSuchClass"):
            with self.subTest(target):
                self.assertExit(target, 1)

    def test_no_test_is_5(self):
        self.assertExit("no_tests", 5)


class NumericsSkipsAre77(unittest.TestCase):
    """The numerics modules that skip themselves, with the condition forced: exit 77, nothing launched."""

    def run_numerics(self, code, env_extra):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **env_extra)
        return subprocess.run([sys.executable, "-c", code], cwd=NUMERICS, env=env, capture_output=True, text=True,
                              timeout=120)

    def test_checkpoint_disk_faults_without_unshare(self):
        for case in ("DiskFull", "Unwritable"):
            with self.subTest(case):
                # No `unshare` on PATH: mount_namespace_available() is False.
                p = self.run_numerics("import sys, run_tests; sys.exit(run_tests.main(['-v', "
                                      f"'test_checkpoint_disk_faults.{case}']))", {"PATH": ""})
                self.assertEqual(p.returncode, 77, p.stdout + p.stderr)
                self.assertIn("needs `unshare -m`", p.stderr)

    def test_peers_crosscheck_without_deepspeed(self):
        # sys.modules["deepspeed"] = None: importlib.util.find_spec("deepspeed") is None, as where it is not installed.
        p = self.run_numerics("import sys; sys.modules['deepspeed'] = None; import run_tests; "
                              "sys.exit(run_tests.main(['-v', 'test_peers_crosscheck.ZeroThreeAgainstDeepSpeed']))", {})
        self.assertEqual(p.returncode, 77, p.stdout + p.stderr)
        self.assertIn("deepspeed is not importable", p.stderr)


if __name__ == "__main__":
    unittest.main()
