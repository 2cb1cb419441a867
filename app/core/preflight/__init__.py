"""Reading a host's evidence: the preflight verdict, the deeper checks, the proof of work, a
GPU's vital signs, and the table of what each GPU model should do."""
