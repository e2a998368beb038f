"""The README and the docs site name files, modules and tests as the evidence behind what they
say; these keep every such name true as the code moves. (`make lint` builds the site with
`mkdocs build --strict`, which checks the links between its own pages.)"""

import re
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "client" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TOP_LEVEL = {p.name for p in ROOT.iterdir()} - {"var", ".venv", ".git"}  # var/ holds venvs: never walked
TEST_FILES = [p for top in sorted(TOP_LEVEL) if (ROOT / top).is_dir() for p in (ROOT / top).rglob("test_*.py")]


def _prose(page: Path) -> str:
    """The page without its fenced code blocks (shell sessions, JSON) and HTML comments."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return re.sub(r"<!--.*?-->", "", text, flags=re.S)


def _code_spans(page: Path) -> list[str]:
    return re.findall(r"`([^`\n]+)`", _prose(page))


def _where(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_every_repository_path_the_docs_name_exists():
    missing = []
    for page in PAGES:
        for span in _code_spans(page):
            path = span.split("::")[0].rstrip(",.;:")
            if ("/" not in path or any(c in path for c in "<>*… ") or path.startswith(("/", "var/"))
                    or path.split("/")[0] not in TOP_LEVEL):
                continue  # not a path in this repository (a storage path, a URL, a pattern)
            if not ((ROOT / path).exists() or (ROOT / f"{path}.py").exists()):
                missing.append(f"{_where(page)}: {path}")
    assert missing == []


def _defines(dotted: str) -> bool:
    """A module (`core.server`), or a name a module defines at its top (`core.events.job_state_changed`)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if module.exists():
            rest = parts[cut:]
            return not rest or (len(rest) == 1 and re.search(
                rf"^(?:def |class |async def )?{rest[0]}\b", module.read_text(), flags=re.M) is not None)
    return False


def test_every_dotted_module_the_docs_name_exists():
    first_party = {"accounts", "core", "jobs", "legacy", "notifications", "paddleweb", "pfs", "quotas"}
    missing = []
    for page in PAGES:
        for span in _code_spans(page):
            name = re.sub(r"'s$", "", span)
            if (re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", name) and name.split(".")[0] in first_party
                    and name.rsplit(".", 1)[1] not in ("py", "yaml", "json", "md", "txt", "toml")
                    and not _defines(name)):
                missing.append(f"{_where(page)}: {name}")
    assert missing == []


def test_every_test_the_docs_name_exists():
    """`path/test_x.py::test_name`, `test_x.py::test_name` (the file found by its name) and a bare
    `test_name` (in any test file) must each name a test function that exists."""
    defined = {p: set(re.findall(r"^(?:async )?def (test_\w+)", p.read_text(), flags=re.M)) for p in TEST_FILES}
    everywhere = set().union(*defined.values())
    missing = []
    for page in PAGES:
        for span in _code_spans(page):
            if m := re.fullmatch(r"([\w/]*test_\w+\.py)::(test_\w+)", span):
                file, test = m.groups()
                files = [p for p in TEST_FILES if p.relative_to(ROOT).as_posix().endswith(file)
                         and ("/" in file or p.name == file)]
                if not any(test in defined[p] for p in files):
                    missing.append(f"{_where(page)}: {span}")
            elif re.fullmatch(r"test_\w+", span) and span not in everywhere:
                missing.append(f"{_where(page)}: {span}")
    assert missing == []


def test_the_readmes_links_lead_to_pages_and_headings_that_exist():
    """README.md is read on the forge and in the checkout, outside the site's strict build."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(ROOT / "README.md")):
        if target.startswith(("http://", "https://")):
            continue
        file, _, anchor = target.partition("#")
        page = ROOT / file
        if not page.is_file():
            broken.append(target)
        elif anchor:
            headings = re.findall(r"^#+ (.+?)\s*$", _prose(page), flags=re.M)
            if anchor not in {slugify(h.replace("`", ""), "-") for h in headings}:
                broken.append(target)
    assert broken == []


def test_the_configuration_page_lists_every_environment_variable_the_settings_read():
    settings = (ROOT / "paddleweb" / "settings.py").read_text()
    read = set(re.findall(r"env\.\w+\(\s*\"([A-Z][A-Z0-9_]+)\"", settings))
    assert len(read) > 40  # the pattern still finds how settings.py reads the environment
    table = {name for row in (ROOT / "docs" / "operating" / "configuration.md").read_text().splitlines()
             if row.startswith("| `") for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}
    assert sorted(read - table) == []
