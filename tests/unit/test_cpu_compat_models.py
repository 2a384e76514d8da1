"""CPU mode's model registry (``remote/cpu_compat/provision_cpu_compat.py``, :func:`only_model_modules`): in a
server's launcher (``python -m sglang.launch_server --model-path DIR``, the shipped files on ``PYTHONPATH``,
``PROVISION_CPU_COMPAT=1``) ``SGLANG_DISABLED_MODEL_ARCHS`` names every model module whose ``EntryClass`` names
none of ``DIR/config.json``'s architectures; nothing is set anywhere else, nor over a value already set, nor
when no module names the model. Run against a stand-in ``sglang`` package (its launcher prints what it got);
the installed SGLang's side (its registry imports every module, and honours the variable) is in
``tests/integration/test_pd_compat.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from provision.sglang import cpu_compat

MODELS = {
    "__init__.py": "",
    "llama.py": "class LlamaForCausalLM: pass\nclass Phi3ForCausalLM: pass\n"
    "EntryClass = [LlamaForCausalLM, Phi3ForCausalLM]\n",
    "qwen2.py": "EntryClass = Qwen2ForCausalLM\n",
    "multi.py": "EntryClass = (\n    GemmaForCausalLM,\n    Gemma2ForCausalLM,\n)\n",
    "helper.py": "# no EntryClass: the registry skips it\n",
}
LAUNCHER = "import json, os, sys; print(json.dumps({'disabled': os.environ.get('SGLANG_DISABLED_MODEL_ARCHS')}))\n"


def stand_in(root: Path) -> Path:
    """A ``sglang`` package with a model registry's folder and a launcher; importing ``sglang.srt`` fails (the
    piece finds the package's folder, it imports nothing of it)."""
    models = root / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "__init__.py").write_text("raise ImportError('the piece imported sglang.srt')\n")
    (root / "sglang" / "launch_server.py").write_text(LAUNCHER)
    for name, text in MODELS.items():
        (models / name).write_text(text)
    return root


def model(tmp_path: Path, archs: object) -> Path:
    path = tmp_path / "model"
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": archs}))
    return path


def launch(tmp_path: Path, argv: list[str], **env_over: str | None) -> tuple[str | None, str]:
    """(SGLANG_DISABLED_MODEL_ARCHS as the launcher saw it, stderr)."""
    root = stand_in(tmp_path / "site") if not (tmp_path / "site").exists() else tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGLANG_DISABLED_MODEL_ARCHS")}
    env.update({"PYTHONPATH": f"{cpu_compat.SHIPPED_DIR}{os.pathsep}{root}", "PROVISION_CPU_COMPAT": "1"})
    for name, value in env_over.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    out = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["disabled"], out.stderr


def test_a_launcher_keeps_only_the_module_that_names_the_model(tmp_path: Path) -> None:
    path = model(tmp_path, ["LlamaForCausalLM"])
    disabled, err = launch(tmp_path, ["-m", "sglang.launch_server", "--model-path", str(path), "--port", "1"])
    assert disabled == "helper,multi,qwen2"
    assert "SGLang's model registry imports only llama (of 4 model modules)" in err
    again, _ = launch(tmp_path, ["-m", "sglang.launch_server", f"--model-path={path}"])
    assert again == "helper,multi,qwen2"


def test_a_list_of_architectures_keeps_each_ones_module(tmp_path: Path) -> None:
    path = model(tmp_path, ["Gemma2ForCausalLM", "Qwen2ForCausalLM"])
    disabled, _ = launch(tmp_path, ["-m", "sglang.launch_server", "--model-path", str(path)])
    assert disabled == "helper,llama"


def test_nothing_is_set_where_the_piece_cannot_be_sure(tmp_path: Path) -> None:
    llama = str(model(tmp_path, ["LlamaForCausalLM"]))
    server = ["-m", "sglang.launch_server", "--model-path"]
    assert launch(tmp_path, [*server, llama], SGLANG_DISABLED_MODEL_ARCHS="")[0] == ""  # pd_env's (empty: all)
    assert launch(tmp_path, [*server, llama], PROVISION_CPU_COMPAT=None)[0] is None  # not CPU mode
    assert launch(tmp_path, ["-c", LAUNCHER, "--model-path", llama])[0] is None  # not a server's launcher
    assert launch(tmp_path, [*server, str(tmp_path / "nowhere")])[0] is None  # no local config.json
    unknown = str(model(tmp_path, ["MambaForCausalLM"]))
    assert launch(tmp_path, [*server, unknown])[0] is None  # no module names it: SGLang's own fallback decides
    assert launch(tmp_path, [*server, str(model(tmp_path, "LlamaForCausalLM"))])[0] is None  # not a list
