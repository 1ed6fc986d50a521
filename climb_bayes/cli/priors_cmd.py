"""``climb-bayes priors``: print the default priors as TOML, with the reasoning."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["priors"]


@click.command()
@click.option(
    "--from",
    "from_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Show the settings of this priors TOML instead of the defaults.",
)
@click.option("--no-comments", is_flag=True, help="Omit the reasoning comments.")
def priors(from_file, no_comments):
    """Print prior settings as TOML (redirect to a file, edit, pass with `fit --priors`)."""
    from climb_bayes.model.priors import load_priors, priors_to_toml

    click.echo(priors_to_toml(load_priors(from_file), comments=not no_comments), nl=False)
