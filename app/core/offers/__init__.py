"""Which offer to rent: the fit, the ranking by expected cost per delivered reference GPU-hour
from our own record of what rentals delivered, the creates' order, and the stopped rentals
started again first."""
