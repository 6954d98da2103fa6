"""You et al. 2020, "The Limit of the Batch Size" (arXiv:2006.08517): its numbers, its Table 3, the authors' MNIST
recipes and our runs against their logs. See README.md in this folder."""
