"""Which offer to rent: the fit, the ranking by expected cost from our own record, the creates'
order, and the stopped rentals started again first."""
