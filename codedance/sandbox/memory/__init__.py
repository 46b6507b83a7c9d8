"""Who pays for the service's memory: the OOM arbiter that stops the trajectory that grew most
since its last committed step (``arbiter``), and the helpers that charge a restore's writes to
the trajectory (``charged_copy``)."""
