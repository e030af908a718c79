"""Assembly of a running gfd: everything between parsed settings and a labelling agent.

:mod:`gfd.cli` parses the command line and dispatches; what a command needs is put
together here, one concern a module:

- :mod:`~gfd.app.node_reader`: where the node's facts come from (NVML on this machine, or
  the simulator), and the checks of the files it reads;
- :mod:`~gfd.app.sinks`: the registry of sink kinds, and the factory that builds the sinks
  a configuration asks for around one Kubernetes client;
- :mod:`~gfd.app.metrics_endpoint`: the metrics and health HTTP endpoint across reloads;
- :mod:`~gfd.app.health_setup`: the GPU health checks of the running configuration;
- :mod:`~gfd.app.signals`: the stop and reload signals, and the watchdog that holds a stop
  to a second;
- :mod:`~gfd.app.run`: the ``run`` subcommand, its loop, and the reload that swaps the
  agent for a new configuration;
- :mod:`~gfd.app.deadline`: the one-shot run's bound, and the watchdog that holds it;
- :mod:`~gfd.app.exit_status`: the process's exit statuses and its one error line.

Every module here imports the heavy parts (NVML, the Kubernetes client, the metrics
server, the simulator) inside the function that uses them, so ``gfd --version`` and a
one-shot feature-file run load only what they use (``tests/test_startup_imports.py``).
"""
