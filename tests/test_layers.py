"""The layers' rule about trio, as docs/architecture.md states it: only ``server/``, ``storage/``
and the trio client tools (``client.py``, ``transfer.py``, ``shovel.py``, ``cli.py``) import trio; ``protocol/``,
``broker/``, the blocking client and ``spark/`` never do, so they run where no event loop is."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "stompmq"
#: Where trio may be imported: whole packages, and single modules of the top level.
TRIO_PACKAGES = {"server", "storage"}
TRIO_MODULES = {"client.py", "transfer.py", "shovel.py", "cli.py"}


def imports_trio(path: Path) -> bool:
    """Whether the module imports trio anywhere (at the top or inside a function)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "trio" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "trio":
            return True
    return False


def may_import_trio(path: Path) -> bool:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] in TRIO_PACKAGES or (len(parts) == 1 and parts[0] in TRIO_MODULES)


def test_only_server_storage_and_the_trio_tools_import_trio() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    outside = [str(p.relative_to(PACKAGE)) for p in modules if imports_trio(p) and not may_import_trio(p)]
    assert outside == [], "these modules import trio outside server/, storage/ and the trio tools"


def test_the_check_sees_a_trio_import() -> None:
    """The rule's own check finds trio where it is known to be, at the top and nested."""
    assert imports_trio(PACKAGE / "server" / "app.py")
    assert not imports_trio(PACKAGE / "sync_client.py")
