"""Sign in with GitHub (django-allauth's GitHub provider, pointed at GITHUB_WEB_URL and
GITHUB_API_URL when it runs), and the organisation and team membership that decides who gets in
and who decides where."""
