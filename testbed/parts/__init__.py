"""The parts of the test bed that ``bed.py up`` starts and supervises, one
module per concern (testbed/README.md lists them):

* ``host``: what the bed needs of this machine: its programs, a network
  index, processes that die with the supervisor, network namespaces, SSH
  banners;
* ``aws``: the emulator, served on loopback, and the IAM users and access
  keys of the shipped policies;
* ``fleet``: the login nodes as EC2 instances (and the noise beside them),
  the load balancers' target groups and the HyperPod cluster;
* ``keys``: the nodes' host keys and the bed's client key;
* ``nodes``: the login nodes (sshd, and a release's sshd in a chroot);
* ``profiles``: the profile nodes (a distribution's sshd set-up in
  namespaces of its own);
* ``lb``: HAProxy in front of the login nodes;
* ``state``: what ``bed.json`` holds, and ``Node``;
* ``context``: what the parts use of the supervisor: ``Options`` (the
  command line) and ``BedContext`` (the ``Bed`` as a Protocol), so that no
  part imports ``supervisor``;
* ``supervisor``: the ``Bed``: ``up``, the control API's node operations
  on the main thread, and ``down``.

Imports run one way: host, keys, state, context; aws, nodes, lb; fleet,
profiles; supervisor.
"""
