"""No test can hang on a call without a deadline: every subprocess.run, Popen.wait and
communicate, thread or Event join/wait in the tests passes its own timeout, and a child's
pipe is read with clock.read_line (readline has no timeout; it reads on a thread). A
hung test would otherwise stop at pytest-timeout's whole-test limit, without saying what
it waited for. Code a test runs in a child process (a string) is the child's: the test
holds the deadline on it."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
BLOCKING_WITHOUT_ARGUMENTS = ("join", "wait", "communicate")
"""Methods that block for ever when called without a timeout (a str.join has an argument)."""
READ_LINE_HELPER = ("clock.py", "read_line")
"""The one place a pipe is read with readline: on a thread, with a deadline."""


def unguarded(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    helper = {node for function in ast.walk(tree) if isinstance(function, ast.FunctionDef)
              and (path.name, function.name) == READ_LINE_HELPER for node in ast.walk(function)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        method, owner = node.func.attr, ast.unparse(node.func.value)
        has_timeout = any(keyword.arg == "timeout" for keyword in node.keywords)
        if (owner == "subprocess" and method in ("run", "call", "check_call", "check_output")
                and not has_timeout) \
                or (method in BLOCKING_WITHOUT_ARGUMENTS and not node.args and not has_timeout) \
                or (method == "readline" and node not in helper):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_every_blocking_call_in_the_tests_has_its_own_timeout() -> None:
    found = [line for path in sorted(TESTS.rglob("*.py")) for line in unguarded(path)]
    assert found == [], "\n".join(found)


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("import subprocess\n"
                      "subprocess.run(['true'])\n"
                      "subprocess.run(['true'], timeout=5)\n"
                      "thread.join()\n"
                      "thread.join(5)\n"
                      "', '.join(words)\n"
                      "process.wait()\n"
                      "event.wait(timeout=1)\n"
                      "process.communicate()\n"
                      "process.stdout.readline()\n")
    lines = [line.split(": ", 1)[0].rsplit(":", 1)[1] for line in unguarded(sample)]
    assert lines == ["2", "4", "7", "9", "10"]
