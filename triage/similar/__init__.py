"""Similar issues and possible duplicates: a TF-IDF index per repository (`index`), the text it
reads from an issue (`text`), and the stored results the issue page shows (`finding`)."""
