"""What every layer shares and no paper defines: files on any filesystem (io_utils), workdir locks, and the
command line's one-sentence errors and help text."""
