"""Package boundaries: the trainer uses the SDK's chat layer, never the model server; no cycles."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imports(path: Path) -> list[tuple[str, int]]:
    """``(module, level)`` of every import in a file (``level`` > 0: relative)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level))
    return found


def test_the_trainer_imports_the_chat_layer_not_the_model_server() -> None:
    files = sorted((ROOT / "agentrl_trainer").rglob("*.py"))
    assert files
    used = {m for f in files for m, level in imports(f) if level == 0 and m.startswith("agentrl_envs")}
    assert any(m.startswith("agentrl_envs.chat") for m in used)
    assert not [m for m in used if m.startswith("agentrl_envs.models")], used


def test_the_chat_layer_does_not_import_the_server_and_launch_does_not_import_server() -> None:
    for f in sorted((ROOT / "agentrl_envs" / "chat").glob("*.py")):
        for module, level in imports(f):
            assert "models" not in module.split("."), f"{f.name} imports {module} (level {level})"
    # server.py uses launch's flags; launch starts the server as a process: one direction only
    top_level = [n for n in ast.parse((ROOT / "agentrl_envs/models/launch.py").read_text()).body]
    module_imports = {(n.module or "") for n in top_level if isinstance(n, ast.ImportFrom) and n.level > 0}
    assert "server" not in module_imports
