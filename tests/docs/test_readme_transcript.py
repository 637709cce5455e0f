"""A newcomer's transcript: README.md read as a newcomer reads it, and run against the built accel, so
that the front door cannot drift from the product.

From README.md itself, this test takes:
- the two setup commands (the first shell block), which must stay exactly these two;
- the inline job file (the one yaml block), which must validate and resolve to exactly the job of
  config_templates/quickstart.yaml, as the README says it is;
- every later shell command, run in order in a scratch folder that looks like the clone's root
  (config_templates/ and build/ linked in, the inline job saved as job.yaml), with the README's own
  `export PATH=...` line in front: each must exit 0, a launch must leave the steps it asked for in
  its output_dir's metrics.jsonl, and `accel report -o DIR` must leave DIR/report.html. A block
  marked `<!-- transcript: validate -->` needs hardware this machine may lack (GPUs, other
  machines, a scheduler): each `accel launch ARGS` in it is checked as `accel config validate ARGS`;
- the C++ block, whose every line (but a comment line, a note to the reader) must be a line of
  examples/minimal/train.cpp, where it comes from;
- the README's length: at most 250 lines.

    ACCEL_BINARY=build/accel python tests/docs/test_readme_transcript.py [-v]
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import markdown_text  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.environ.get("ACCEL_README", os.path.join(ROOT, "README.md"))
ACCEL = os.environ.get("ACCEL_BINARY", os.path.join(ROOT, "build", "accel"))
SETUP_COMMANDS = ["bash scripts/quickstart.sh", "bash scripts/test.sh"]
MAX_LINES = 250


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def readme_blocks():
    return markdown_text.fenced_blocks(read(README))


def shell_blocks():
    return [b for b in readme_blocks() if b.info in ("bash", "sh", "console", "shell")]


def set_values(args):
    """The --set KEY=VALUE pairs of an argument list, as a dict."""
    values = {}
    for i, a in enumerate(args):
        if a == "--set" and i + 1 < len(args) and "=" in args[i + 1]:
            key, value = args[i + 1].split("=", 1)
            values[key] = value
    return values


def as_validation(command):
    """`accel config validate ARGS` for a command that runs `accel launch ARGS` (under srun or
    mpirun too); None for a command without `accel launch`."""
    words = shlex.split(command)
    for i in range(len(words) - 1):
        if words[i] == "accel" and words[i + 1] == "launch":
            args = [w for w in words[i + 2:] if w != "--dry-run"]
            return "accel config validate " + " ".join(shlex.quote(w) for w in args)
    return None


class Transcript(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(ACCEL, os.X_OK):
            raise unittest.SkipTest("no accel at %s (set ACCEL_BINARY)" % ACCEL)
        cls.text = read(README)
        cls.blocks = readme_blocks()
        yaml_blocks = [b for b in cls.blocks if b.info == "yaml"]
        assert len(yaml_blocks) == 1, "README.md should show one job file (one yaml block), has %d" % len(yaml_blocks)
        cls.job_text = yaml_blocks[0].text()
        cls.scratch = tempfile.TemporaryDirectory(prefix="accel-readme-")
        cls.work = cls.scratch.name
        # The clone's root as the README's commands see it.
        os.symlink(os.path.join(ROOT, "config_templates"), os.path.join(cls.work, "config_templates"))
        os.symlink(os.path.dirname(os.path.abspath(ACCEL)), os.path.join(cls.work, "build"))
        with open(os.path.join(cls.work, "job.yaml"), "w") as f:
            f.write(cls.job_text)

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    def run_shell(self, command, prefix):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
        env["PATH"] = "/usr/bin:/bin"  # `accel` comes from the README's own PATH line, or not at all
        env["XDG_CONFIG_HOME"] = os.path.join(self.work, ".config")
        script = (prefix + "\n" if prefix else "") + command
        return subprocess.run(["bash", "-c", script], cwd=self.work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300)

    def test_readme_is_short(self):
        lines = self.text.count("\n")
        self.assertLessEqual(lines, MAX_LINES, "README.md has %d lines; the front door keeps to %d" % (lines, MAX_LINES))

    def test_setup_commands_are_the_two(self):
        first = shell_blocks()[0]
        self.assertEqual(markdown_text.shell_commands(first), SETUP_COMMANDS)
        for command in SETUP_COMMANDS:
            self.assertTrue(os.path.isfile(os.path.join(ROOT, command.split()[1])), command)

    def test_job_file_is_the_quickstart(self):
        ok = self.run_shell("build/accel config validate job.yaml", "")
        self.assertEqual(ok.returncode, 0, ok.stdout)
        shown = self.run_shell("build/accel config show job.yaml", "")
        template = self.run_shell("build/accel config show config_templates/quickstart.yaml", "")
        self.assertEqual(shown.returncode, 0, shown.stdout)
        self.assertEqual(shown.stdout, template.stdout,
                         "README.md's job file no longer resolves to config_templates/quickstart.yaml's job")

    def test_cpp_is_from_the_example(self):
        source = os.path.join(ROOT, "examples", "minimal", "train.cpp")
        lines = {line.strip() for line in read(source).split("\n")}
        cpp = [b for b in self.blocks if b.info == "cpp"]
        self.assertEqual(len(cpp), 1, "README.md should show one C++ program")
        code = [line for line in cpp[0].lines if line.strip() and not line.strip().startswith("//")]  # a note to the reader
        self.assertGreater(len(code), 15, "README.md's program is the example's main()")
        missing = [line for line in code if line.strip() not in lines]
        self.assertEqual(missing, [], "lines of README.md's C++ that examples/minimal/train.cpp does not have")

    def test_commands_run(self):
        blocks = shell_blocks()[1:]
        path_lines = [c for b in blocks for c in markdown_text.shell_commands(b) if c.startswith("export PATH=")]
        self.assertEqual(len(path_lines), 1, "README.md should say once how to put accel on PATH")
        prefix = "set -e\n" + path_lines[0]
        ran = 0
        job_output_dir = re.search(r"^\s*output_dir:\s*(\S+)", self.job_text, re.M).group(1)
        for block in blocks:
            for command in markdown_text.shell_commands(block):
                if command.startswith("export PATH="):
                    continue
                if block.marker == "validate":
                    command = as_validation(command)
                    if command is None:
                        continue
                with self.subTest(line=block.line, command=command):
                    words = shlex.split(command)
                    self.assertEqual(words[0], "accel", "a README command that is not accel's: %s" % command)
                    result = self.run_shell(command, prefix)
                    self.assertEqual(result.returncode, 0, "README.md line %d: %s\n%s" % (block.line, command, result.stdout))
                    ran += 1
                    if words[:2] == ["accel", "launch"]:
                        sets = set_values(words)
                        out = sets.get("training.output_dir", job_output_dir)
                        metrics = os.path.join(self.work, out, "metrics.jsonl")
                        self.assertTrue(os.path.isfile(metrics), "no %s after: %s" % (metrics, command))
                        if "training.max_steps" in sets:
                            records = [line for line in read(metrics).split("\n") if line.strip()]
                            self.assertEqual(len(records), int(sets["training.max_steps"]), command)
                    if words[:2] == ["accel", "report"] and "-o" in words:
                        page = os.path.join(self.work, words[words.index("-o") + 1], "report.html")
                        self.assertTrue(os.path.isfile(page), "no %s after: %s" % (page, command))
        self.assertGreaterEqual(ran, 6, "README.md's commands were not found")

    def test_validation_is_a_real_check(self):
        """A control: a recipe's launch, checked as a validation, fails when the job is wrong."""
        command = as_validation("srun --nodes=2 accel launch job.yaml --set backend=fsdpp")
        self.assertEqual(command, "accel config validate job.yaml --set backend=fsdpp")
        result = self.run_shell("build/" + command, "")
        self.assertEqual(result.returncode, 2, result.stdout)


if __name__ == "__main__":
    unittest.main()
