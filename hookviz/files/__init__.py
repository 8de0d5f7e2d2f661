"""hookviz's file format: saving and loading runs and watch histories."""
