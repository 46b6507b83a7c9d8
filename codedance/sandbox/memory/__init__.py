"""Who pays for the service's memory: each trajectory's growth since its last committed step
(``accounting``), the memory cgroups' figures (``cgroup_memory``), the OOM arbiter that stops the
trajectory that grew most (``arbiter``), and the helpers that charge a restore's writes to the
trajectory (``charged_copy``)."""
