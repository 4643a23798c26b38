"""`python -m bertscope` runs the same command line as the `bertscope` script."""

from bertscope.cli import main

if __name__ == "__main__":
    main()
