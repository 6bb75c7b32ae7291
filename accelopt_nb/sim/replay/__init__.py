"""Loop replay: run a loop's first iterations, extrapolate the rest exactly or not at all (``loops``), with values
re-run the recorded primitive calls (``values``), where possible all iterations at once (``lanes``). The wing
observes the core through ``core.hooks`` (``state.ReplayState``) and keeps its own state there."""
