"""``python -m zbroker`` runs the command-line interface."""

# cli/ is installed as zbroker.cli (see pyproject.toml); mypy checks it as cli/ directly.
from zbroker.cli.main import main  # type: ignore[import-not-found, unused-ignore]

if __name__ == "__main__":
    main()
