"""``python -m baton ...`` runs ``baton ...`` (useful where the entry point's script is not on PATH)."""

from workers.cli import main

if __name__ == "__main__":
    main()
