"""Command-line interface: ``climb-bayes <command>``.

Each command lives in its own module under :mod:`climb_bayes.cli` (``training``'s ``train``
command lives in the ``training`` package) and is imported only when used, so ``climb-bayes
--help`` is instant and ``climb-bayes fit`` works without the ``[train]`` extra.

Every user error (:class:`~climb_bayes.errors.ClimbError`, ``training``'s ``TrainingError``)
is printed as one clear message with exit code 2 and no traceback.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import click

__all__ = ["main", "cli", "COMMANDS"]

COMMANDS: dict[str, tuple[str, str]] = {
    "fit": (
        "climb_bayes.cli.fit_cmd:fit",
        "Fit CLIMB and rival laws to a runs table; stack them (NUTS, Laplace, point).",
    ),
    "summary": (
        "climb_bayes.cli.fit_cmd:summary",
        "Print the parameter table and diagnostics of a fit.",
    ),
    "priors": (
        "climb_bayes.cli.priors_cmd:priors",
        "Print the default priors as TOML (with reasons).",
    ),
    "simulate": (
        "climb_bayes.cli.simulate_cmd:simulate",
        "Simulate a runs table on the Algorithm-1 design.",
    ),
    "predict": (
        "climb_bayes.cli.predict_cmd:predict",
        "Credible intervals on loss at any budget and mixture.",
    ),
    "optimize": (
        "climb_bayes.cli.optimize_cmd:optimize",
        "Optimal mixture as a posterior distribution.",
    ),
    "plan": (
        "climb_bayes.cli.plan_cmd:plan",
        "Write the Algorithm-1 run list (plan CSV) for training.",
    ),
    "suggest": (
        "climb_bayes.cli.suggest_cmd:suggest",
        "Rank candidate next runs by expected information.",
    ),
    "evaluate": (
        "climb_bayes.cli.evaluate_cmd:evaluate",
        "Score laws on held-out runs (R², Huber, coverage...).",
    ),
    "robustness": (
        "climb_bayes.cli.robustness_cmd:robustness",
        "How r* moves under other priors, data, likelihoods; SBC calibration.",
    ),
    "plot": ("climb_bayes.cli.plot_cmd:plot", "Plots of a fit (PNG/SVG)."),
    "report": ("climb_bayes.cli.report_cmd:report", "One self-contained HTML report of a fit."),
    "train": ("training.cli:train", "Train the runs of a plan with Hugging Face ([train] extra)."),
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        target, help_text = COMMANDS[name]
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if name == "train" or missing.split(".")[0] in {"torch", "transformers", "tokenizers"}:
                return _unavailable(
                    name,
                    help_text,
                    f"needs the [train] extra ({exc}). Install "
                    "it with: pip install torch==2.13.0 && pip install -e '.[train]'",
                )
            if missing.startswith("climb_bayes"):
                return _unavailable(name, help_text, "is not available in this version.")
            raise
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_text) for name, (_t, help_text) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _unavailable(name: str, help_text: str, why: str) -> click.Command:
    @click.command(name=name, help=help_text, context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        raise click.ClickException(f"`climb-bayes {name}` {why}")

    return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="climb-bayes")
def cli() -> None:
    """climb-bayes: multilingual data-mixture scaling laws (CLIMB) with honest uncertainty.

    Typical flow: plan -> train -> fit -> predict / optimize -> evaluate.
    """


def _user_error_types() -> tuple[type[BaseException], ...]:
    from climb_bayes.errors import ClimbError

    types: list[type[BaseException]] = [ClimbError]
    training_errors = sys.modules.get("training.errors")
    if training_errors is not None and hasattr(training_errors, "TrainingError"):
        types.append(training_errors.TrainingError)
    return tuple(types)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``climb-bayes`` console script; returns the exit code."""
    from climb_bayes.runtime import setup_jax

    setup_jax()  # before any command touches JAX: x64, one host device per core
    warnings.filterwarnings("ignore", category=FutureWarning)
    shown, warnings.showwarning = warnings.showwarning, _show_warning
    try:
        cli.main(args=argv, prog_name="climb-bayes", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except _user_error_types() as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    finally:
        warnings.showwarning = shown
    return 0


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line on stderr, ``warning: <message>`` (a library's own category named
    in brackets), instead of Python's ``file:line: Category: message`` and the source line,
    which name climb-bayes' internals rather than the user's input."""
    label = "warning" if category is UserWarning else f"warning ({category.__name__})"
    click.echo(f"{label}: {message}", err=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def _entry() -> None:
    """Console-script wrapper: exit with :func:`main`'s code."""
    sys.exit(main())
