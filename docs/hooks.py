"""MkDocs hooks: the recipe and command-line references, generated from scd at every build
(scd.config.reference), so that neither can drift from the code."""

from __future__ import annotations

from mkdocs.structure.files import File


def on_files(files, config):  # noqa: ANN001, ANN201 (MkDocs' hook signature)
    from scd.cli import build_parser
    from scd.config.reference import cli_reference, recipe_reference
    from scd.pipeline.recipe import recipe_sections

    pages = {
        "reference/recipe.md": recipe_reference(recipe_sections()),
        "reference/cli.md": cli_reference(build_parser()),
    }
    for uri, text in pages.items():
        files.append(File.generated(config, uri, content=text))
    return files
