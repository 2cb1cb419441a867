"""The hosts: SSH to rented machines, their preflight, watchdog, heartbeat and NVML samples."""
