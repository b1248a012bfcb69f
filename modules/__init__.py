"""Task modules: one file per module; the file name is the YAML key."""
