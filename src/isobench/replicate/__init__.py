"""`isobench replicate`: run a paper's studies at a size that resolves its findings, then test
each finding (studies/findings/<paper>.yaml) and print one verdict table."""
