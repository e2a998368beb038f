from django import forms

from .models import SUBSCRIBABLE_CHOICES, Event


class WebhookForm(forms.Form):
    url = forms.CharField(label="URL", max_length=500, help_text="http:// or https://, reachable from the service")
    events = forms.MultipleChoiceField(choices=SUBSCRIBABLE_CHOICES, widget=forms.CheckboxSelectMultiple,
                                       initial=[Event.SUCCEEDED, Event.FAILED, Event.KILLED])
    secret = forms.CharField(required=False, max_length=200, widget=forms.PasswordInput,
                             help_text="Signs every message; leave empty to have one made (shown once).")


class WebhookEditForm(WebhookForm):
    secret = forms.CharField(required=False, max_length=200, widget=forms.PasswordInput,
                             help_text="A new secret replaces the old one at once; leave empty to keep it.")
    active = forms.BooleanField(required=False, help_text="Off: nothing is sent to it until it is on again.")


class EmailForm(forms.Form):
    job_end = forms.BooleanField(required=False, label="E-mail me when one of my jobs ends")
