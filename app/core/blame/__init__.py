"""Whose fault a failure is (the host's or the campaign's), the boot texts known to be fatal,
and what the rules decide under the campaign's blame."""
