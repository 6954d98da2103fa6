"""What every layer shares and no paper defines: files on any filesystem (io_utils), the files of a run directory
that the trainer writes and the study runner reads (run_files), the code's commit, the machine and file hashes that
results record (code_state), workdir locks, and the command line's one-sentence errors and help text."""
