"""Who pays for the service's memory: the memory cgroups' figures (``cgroup_memory``), the OOM
arbiter that stops the trajectory that grew most (``arbiter``), and the helpers that charge a
restore's writes to the trajectory (``charged_copy``). Each trajectory's growth since its last
committed step is ``codedance.sandbox.trajectory_memory``, which builds on the cgroups and files
modules that build on this package."""
