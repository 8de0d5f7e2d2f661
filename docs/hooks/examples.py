"""MkDocs hooks (mkdocs.yml `hooks:`): the saved pages the guides embed, made from real runs.

``on_pre_build`` runs ``docs/live_examples.py`` in a fresh process, which records each example and
writes its ``save_html`` page to ``build/docs-examples/``; ``on_files`` puts them in the site as
``examples/<name>.html``. The pages are made again only when hookviz's code, its page bundle or
the script changed since the last build (a fingerprint of those files), so ``mkdocs serve`` and a
second build reuse them. A page that embeds ``examples/<name>.html`` where no such page was made
gets a warning (``--strict`` fails).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

logger = logging.getLogger("mkdocs.hooks.hookviz.examples")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "live_examples.py"
SITE_FOLDER = "examples"
BUILT = ROOT / "build" / "docs-examples"  # its examples/ folder is copied to the site's
PAGES = BUILT / SITE_FOLDER
STAMP = BUILT / "fingerprint"
IFRAME = re.compile(r"<iframe\b[^>]*\bsrc=\"([^\"]*)\"")


def _fingerprint() -> str:
    """sha256 over the script, every module of hookviz and the page bundle, by path and content."""
    digest = hashlib.sha256()
    package = ROOT / "hookviz"
    sources = [SCRIPT, *sorted(package.rglob("*.py")), *sorted((package / "widget" / "static").glob("*"))]
    for path in sources:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _names() -> list[str]:
    """The example names ``docs/live_examples.py`` defines, read without importing it (no torch here)."""
    match = re.search(r"^EXAMPLES = \{(.*)\}$", SCRIPT.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise PluginError(f"{SCRIPT.relative_to(ROOT)} has no one-line EXAMPLES = {{...}}")
    return re.findall(r"\"(\w+)\":", match.group(1))


def on_pre_build(config):
    fingerprint = _fingerprint()
    pages = [PAGES / f"{name}.html" for name in _names()]
    if STAMP.exists() and STAMP.read_text() == fingerprint and all(page.exists() for page in pages):
        return
    STAMP.unlink(missing_ok=True)
    BUILT.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(PAGES)], cwd=ROOT, env=environment, capture_output=True, text=True
    )
    if done.returncode != 0:
        script = SCRIPT.relative_to(ROOT)
        raise PluginError(f"{script} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    STAMP.write_text(fingerprint)


def on_files(files, config):
    for name in _names():
        files.append(
            File(
                f"{SITE_FOLDER}/{name}.html",
                src_dir=str(BUILT),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )
    return files


def on_page_content(html, page, config, files):
    # Raw HTML is not checked by MkDocs' link validation: check each embedded example here.
    folder = PurePosixPath(page.url) if page.url.endswith("/") else PurePosixPath(page.url).parent
    for src in IFRAME.findall(html):
        if f"{SITE_FOLDER}/" in src and files.get_file_from_path(os.path.normpath(folder / src)) is None:
            logger.warning(
                "%s embeds %s, which is no page of the site (%s/ holds %s)",
                page.file.src_uri,
                src,
                SITE_FOLDER,
                ", ".join(f"{name}.html" for name in _names()),
            )
    return html
