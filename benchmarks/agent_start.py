"""A fresh agent's start on this machine: the CPU of one ``python3 -c BOOTSTRAP`` answering one script call.

    python benchmarks/agent_start.py [--python /usr/bin/python3] [--runs 30]

Every host of a fresh run starts one agent, so its CPU is paid once per host per run (and on the benchmark lab,
where every host runs on the controller's cores, it bounds the wall time). Each line is the median (and the
least) CPU of ``--runs`` starts, measured from the parent (``RUSAGE_CHILDREN``), beside its anchors:
``python3 -c pass`` (the interpreter alone: no agent can cost less) and ``python3 -c 'import json'``. The agent
runs a script on the host library (``file_state.py stat``), in a private HOME:

* ``agent, compiling``: in a HOME with nothing kept (and ``PYTHONDONTWRITEBYTECODE=1``, so that it stays so),
  the agent compiles itself, the host library and the script (as it did before the kept code, and as it does
  on a host's first run);
* ``agent, kept code``: the next starts, from ``~/.cache/provision-code`` (``remote/programs/agent_boot.py``).

Then what one command costs the host through a running agent (its ``exec`` op: ``test -d /etc`` in a new
session, as a ``command``/``shell`` task runs; ``remote/programs/spawn.py``): the agent's and the command's CPU
per command, over ``--commands`` of them, beside ``sh -c 'test -d /etc'`` started alone (the shell's own start,
run and exit: no tool can run the command for less).
"""

from __future__ import annotations

import argparse
import base64
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provision.transport.agent import PythonAgent, script_source  # noqa: E402

COMMAND = b"test -d /etc\n"


def _answer(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    size = int(proc.stdout.readline())
    answer = json.loads(proc.stdout.read(size))
    if answer["rc"] != 0:
        raise SystemExit(f"the agent failed: {base64.b64decode(answer['err']).decode(errors='replace')}")


def _cpu_ms(argv: list[str], env: dict[str, str], agent: bool, commands: int = 0) -> float:
    """CPU ms of one start of ``argv`` (an agent: answering its first request, then ``commands`` exec ops)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if agent:
        _answer(proc)
        assert proc.stdin is not None
        for _ in range(commands):
            op = {"op": "exec", "script": base64.b64encode(COMMAND).decode(), "stdin": "", "timeout": 60}
            frame = json.dumps(op).encode()
            proc.stdin.write(b"%d\n" % len(frame) + frame)
            proc.stdin.flush()
            _answer(proc)
    proc.communicate(timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default="/usr/bin/python3", help="the host's interpreter")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--commands", type=int, default=100, help="exec ops per agent, for the per-command line")
    args = parser.parse_args()
    text, _ = script_source("file_state.py")
    request = base64.b64encode(json.dumps({"paths": ["/etc/hostname"]}).encode()).decode()
    first = {"name": "file_state.py", "source": text, "args": ["stat"], "stdin": request}
    agent = list(PythonAgent.command(args.python, 0.0, first).argv)
    home = tempfile.mkdtemp(prefix="provision-agent-start-")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path(home) / "kept")}
    cold = {"PATH": "/usr/bin:/bin", "HOME": str(Path(home) / "cold"), "PYTHONDONTWRITEBYTECODE": "1"}
    for folder in (env["HOME"], cold["HOME"]):
        Path(folder).mkdir()
    try:
        cases = [
            ("python3 -c pass (anchor)", [args.python, "-c", "pass"], env, False),
            ("python3 -c 'import json' (anchor)", [args.python, "-c", "import json"], env, False),
            ("agent, compiling", agent, cold, True),
            ("agent, kept code", agent, env, True),
        ]
        _cpu_ms(agent, env, True)  # the first start keeps the code
        print(f"fresh agent start, CPU ms over {args.runs} runs ({args.python})")
        for label, argv, case_env, is_agent in cases:
            runs = sorted(_cpu_ms(argv, case_env, is_agent) for _ in range(args.runs))
            print(f"  {label:36} median {statistics.median(runs):6.1f}   least {runs[0]:6.1f}")
        alone = sorted(_cpu_ms(["/bin/sh", "-c", COMMAND.decode()], env, False) for _ in range(args.runs))
        start = [_cpu_ms(agent, env, True) for _ in range(args.runs)]
        many = [_cpu_ms(agent, env, True, args.commands) for _ in range(max(3, args.runs // 4))]
        per = (statistics.median(many) - statistics.median(start)) / args.commands
        print(f"one command ({COMMAND.decode().strip()}), CPU ms")
        print(f"  {'sh -c alone (anchor)':36} median {statistics.median(alone):6.2f}   least {alone[0]:6.2f}")
        print(f"  {'through the agent (exec op)':36} median {per:6.2f}   (over {args.commands} per agent)")
        if any(Path(cold["HOME"]).iterdir()):
            raise SystemExit("the compiling case kept code: its line measured the kept code")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
