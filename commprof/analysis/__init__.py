"""Pure functions over numbers: the step and memory model, the checklist, box comparisons, fits and
reference profiles, statistics, attribution. Nothing here prints or draws."""
