"""What runs inside the jail: the zygote, each trajectory's holder and its step processes.

``python -m codedance.sandbox.jail.runtime`` starts the zygote. These modules import only each
other, the wire format (``codedance.sandbox.protocol``) and the core of ``codedance``, never the
controller: every module the zygote holds is memory whose page tables each step's fork copies
(pinned by ``tests/test_layers.py::test_the_jail_imports_nothing_of_the_controller``).
"""
