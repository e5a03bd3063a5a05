"""The bottom layer: model shapes, the collectives table, sizes, units, the configs ranks receive,
errors and exit codes, file I/O, machine and version info."""
