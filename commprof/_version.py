"""The package version (its own module, so modules that record it never import the package)."""
__version__ = "0.1.0"
