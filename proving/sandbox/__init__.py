"""The one sandbox for code a model wrote: evaluation samples (with and without the sample
server) and Bash run in it (docs/evaluation.md, "What code written by the model can and
cannot do").

- ``bwrap``: the bubblewrap command line: new user, PID, network, IPC, UTS and mount
  namespaces, the system read-only, one writable folder, an empty environment;
- ``limits``: the process-count and memory limits and where they are set;
- ``cgroup``: a memory limit for the sandbox as a whole, where the machine offers a
  writable cgroup;
- ``nest``: how the sample server gives each forked sample namespaces of its own
  (standard library only: it runs inside the server's sandbox);
- ``policy``: whether evaluation is confined (only a person can turn it off).
"""
