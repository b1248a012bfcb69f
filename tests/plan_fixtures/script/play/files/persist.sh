#!/bin/sh
nvidia-smi -pm 1
