from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from triage.views import console as views

urlpatterns = [
    path("", views.home, name="home"),
    path(
        "login/",
        auth_views.LoginView.as_view(extra_context={"demo": settings.TRIAGE_DEMO}),
        name="login",
    ),
    path("login/demo/", views.demo_login, name="demo-login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("q/<slug:slug>/", views.inbox, name="inbox"),
    path("q/<slug:slug>/sync/", views.start_sync, name="start-sync"),
    path("q/<slug:slug>/sync/status/", views.sync_status, name="sync-status"),
    path("p/<int:pk>/", views.proposal_detail, name="proposal"),
    path("p/<int:pk>/decide/", views.decide, name="decide"),
    path("w/<int:pk>/", views.write_status, name="write-status"),
    path("w/<int:pk>/retry/", views.retry_write, name="retry-write"),
    path("i/<int:pk>/history/", views.history, name="history"),
    path("rubrics/<str:name>/", views.rubric_detail, name="rubric"),
    path("decisions.<str:fmt>", views.export_decisions, name="export-decisions"),
    path("admin/", admin.site.urls),
]
