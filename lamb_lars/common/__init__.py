"""What every layer shares and no paper defines: files on any filesystem (io_utils), the files of a run directory
that the trainer writes and the study runner reads (run_files), workdir locks, and the command line's one-sentence
errors and help text."""
