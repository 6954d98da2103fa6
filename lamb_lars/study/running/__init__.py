"""The running layer of a study: processes, files, the search, the store (orchestration; publishing is
study/publishing/)."""
