from django import forms

from .models import Event


class WebhookForm(forms.Form):
    url = forms.CharField(label="URL", max_length=500, help_text="http:// or https://, reachable from the service")
    events = forms.MultipleChoiceField(choices=Event.choices, widget=forms.CheckboxSelectMultiple,
                                       initial=[Event.SUCCEEDED, Event.FAILED, Event.KILLED])
    secret = forms.CharField(required=False, max_length=200, widget=forms.PasswordInput,
                             help_text="Signs every message; leave empty to have one made (shown once).")


class EmailForm(forms.Form):
    job_end = forms.BooleanField(required=False, label="E-mail me when one of my jobs ends")
