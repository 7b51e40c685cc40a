"""What tests share: helper modules and the scripts some tests start as processes."""
