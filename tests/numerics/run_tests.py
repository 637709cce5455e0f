"""`python -m unittest` with an exit status ctest can read as a skip: what ctest runs for each
numerics entry (tests/CMakeLists.txt, add_numerics_test), in tests/numerics:

    python -m run_tests -v test_checkpoint_disk_faults.DiskFull

Same arguments and output as `python -m unittest`. Exit status:
- 1 when a test failed or errored (an unexpected success included);
- 77 when every test that ran was skipped (ctest's SKIP_RETURN_CODE: "Skipped", not "Passed");
- 5 when no test ran at all (as Python 3.12's unittest does; nothing was checked);
- 0 otherwise: at least one test or subtest passed and none failed.
A test whose subtests all skipped counts as skipped; one with a passing subtest counts as passed.
"""
import sys
import unittest

SKIPPED = 77
NO_TESTS = 5


class _Result(unittest.TextTestResult):
    """TextTestResult that also counts the outcomes that are passes, not skips."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = 0

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is None:
            self.passed += 1

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.passed += 1


class _Runner(unittest.TextTestRunner):
    resultclass = _Result


def exit_code(result):
    """The exit status of a finished run (see the module's docstring)."""
    if not result.wasSuccessful():
        return 1
    if result.passed:
        return 0
    return SKIPPED if result.skipped else NO_TESTS


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    program = unittest.main(module=None, argv=["python -m run_tests"] + argv, testRunner=_Runner, exit=False)
    return exit_code(program.result)


if __name__ == "__main__":
    sys.exit(main())
