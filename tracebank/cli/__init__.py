"""tracebank's command line: thin wrappers over each stage's public function."""
