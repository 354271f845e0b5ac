"""The language-model kind's views: the text, next-token bars, Why? and Patching."""
