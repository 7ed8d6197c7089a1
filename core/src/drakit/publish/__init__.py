"""Publishing: devices rendered into ResourceSlices, compared with the server's, kept in step."""
