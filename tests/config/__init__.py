"""Tests of the settings (gfd.config): precedence and every error path."""
