"""rentwatch: supervise GPU instances rented on consumer marketplaces."""

import warnings

# asyncssh (2.24) names cryptography's DSA types at import, and a recent cryptography warns
# that DSA is deprecated, five warnings on stderr before every command's own output (a fresh
# `pip install .` resolves cryptography 51). rentwatch offers no DSA key; only these are muted.
warnings.filterwarnings("ignore", message=r"DSA is deprecated", module=r"asyncssh\.")

__version__ = "0.1.0"
