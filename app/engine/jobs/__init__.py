"""The jobs: dispatching a campaign's jobs to proven hosts, running them, pulling their artifacts."""
