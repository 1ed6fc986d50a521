"""Layer 6, views: matplotlib figures and the HTML report."""
